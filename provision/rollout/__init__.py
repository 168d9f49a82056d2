"""Getting a locked environment onto other machines: an offline bundle for a machine with no
network (bundle, unbundle), an Ansible run for many (fleet)."""
