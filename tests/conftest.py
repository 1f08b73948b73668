import os
import sys

# The tests import `reference` (naive implementations) from this folder.
sys.path.insert(0, os.path.dirname(__file__))
