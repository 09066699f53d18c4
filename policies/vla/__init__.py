"""The VLA policy (``policy.kind=vla``): a Hugging Face VLM backbone with a flow-matching action expert.

transformers and peft (the ``vla`` extra) are imported only when a backbone is loaded.
"""

from .backbone import VLMLoadError, load_vlm
from .policy import InstructionError, VLAPolicy

__all__ = ["InstructionError", "VLAPolicy", "VLMLoadError", "load_vlm"]
