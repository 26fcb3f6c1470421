from edgespec.cli.app import main

main()
