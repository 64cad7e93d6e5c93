from tokenrace.cli import main

main()
