from posenc_cli.cli.main import main

main()
