from posenc_cli.cli.main import console_main

console_main()
