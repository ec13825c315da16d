from posenc_cli.cli import main

main()
