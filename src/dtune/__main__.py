from dtune.cli import entry

entry()
