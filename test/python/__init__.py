# A package, so that one pytest call can run this directory beside
# test/integration (conftest.py says why).
