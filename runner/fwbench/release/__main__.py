"""`python -m fwbench.release merge OUT_DIR PART.json...` (the release workflow's last job)."""

from fwbench.release.record import main

raise SystemExit(main())
