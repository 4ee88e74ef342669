"""Put this folder on PYTHONPATH to run a command on the CPU harness as a
user would on a GPU host: Python imports this at start-up, and the
torchvision stand-ins (see sglang_spec_plugins.testing.cpu) let SGLang import."""

from sglang_spec_plugins.testing.cpu import install_stand_ins

install_stand_ins()
