"""Helpers shared by the test modules: references, harnesses, servers and fixtures."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
