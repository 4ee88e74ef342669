import pytest


pytest.skip("needs a GPU", allow_module_level=True)
