"""One module per `trainplan` subcommand (NAME, HELP, add_arguments, run)."""
