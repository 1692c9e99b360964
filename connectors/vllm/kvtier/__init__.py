"""kvtier for Python engines: a binding over libkvtier's C ABI and a vLLM KV connector.

    from kvtier import Connector, ConnectorOptions   # the native connector (ctypes)
    kvtier.vllm.KVTierConnector                       # vLLM v1 KV connector (imports vllm)
"""

from kvtier._native import Connector, ConnectorOptions, KvtError, library_path

__all__ = ["Connector", "ConnectorOptions", "KvtError", "library_path"]
__version__ = "0.1.0"
