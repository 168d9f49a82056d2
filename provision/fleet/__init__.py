"""`provision fleet`: one environment rolled out to many hosts with Ansible, verified on each,
reported. It reads a bundle through bundlefile and never imports bundle.

Modules: `playbook` (the environment's vars.yml and playbook.yml, the checks before Ansible starts,
the run of ansible-playbook with provision's progress callback), `fleet_report` (what happened on
each host, judged once, shown as a table, fleet.json and fleet.html from `fleet.html.j2`, the
template beside it).
"""
