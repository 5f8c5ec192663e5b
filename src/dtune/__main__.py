from dtune.cli import main

raise SystemExit(main())
