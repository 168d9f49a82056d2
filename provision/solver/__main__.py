from provision.solver.cli import main

main()
