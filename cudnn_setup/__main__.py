from cudnn_setup.cli import console_main

console_main()
