// Translation unit of libkvtier.so: the library's code is kvt_connector (linked whole);
// this file only pins the header it exports so the shared library builds from one source.
#include "connectors/kvtier_c.h"
