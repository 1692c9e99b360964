"""kvtier for Python engines: a binding over libkvtier's C ABI and a vLLM KV connector.

    from kvtier import Connector, ConnectorOptions   # the native connector (ctypes)
    kvtier.vllm.KVTierConnector                       # vLLM v1 KV connector (imports vllm)
    kvtier.parse_byte_size("4G") == 4 << 30           # kvtierd's and the CLI's parser
"""

from kvtier._native import Connector, ConnectorOptions, KvtError, library_path, parse_byte_size

__all__ = ["Connector", "ConnectorOptions", "KvtError", "library_path", "parse_byte_size"]
__version__ = "0.1.0"
