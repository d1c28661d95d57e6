from guide.cli import main

raise SystemExit(main())
