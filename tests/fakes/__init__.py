"""Stand-ins for NVIDIA software and hosts, built from real parts where tests check them."""
