import sys

from obsmem.surfaces.http.server import main

sys.exit(main())
