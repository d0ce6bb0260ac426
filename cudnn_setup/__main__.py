from cudnn_setup.cli import main

main()
