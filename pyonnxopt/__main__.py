import sys

from pyonnxopt.cli import main

sys.exit(main())
