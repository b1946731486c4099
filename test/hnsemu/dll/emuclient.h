/* emuclient.h: the wire between the computenetwork.dll / vmcompute.dll
 * stand-ins and the HNS emulator (test/hnsemu). Each call is one TCP
 * connection to HNSEMU_ADDR (default 127.0.0.1:5895):
 *
 *   request:  u32 count, then count fields, each u32 length + UTF-8 bytes
 *             (length 0xFFFFFFFF: a NULL pointer). Field 0 is the emulated
 *             node (HNSEMU_NODE, default "default"), field 1 the exported
 *             function's name, the rest its arguments in order: strings as
 *             UTF-8, GUIDs in their registry form, handles in decimal.
 *   response: u32 HRESULT, u64 handle (the object a Create/Open made), then
 *             two fields as above: the output string (properties, a listing,
 *             HNSCall's response) and the result string (HNS' error JSON).
 *
 * All little-endian. The strings handed back to the caller are UTF-16,
 * allocated with CoTaskMemAlloc, as hcsshim frees them with CoTaskMemFree
 * (internal/interop ConvertAndFreeCoTaskMemString). */
#ifndef HNSEMU_CLIENT_H
#define HNSEMU_CLIENT_H
#include <windows.h>

#define EMU_MAXARGS 6

/* emu_call forwards fn with its arguments (UTF-16 strings; NULL stays NULL)
 * and returns the emulator's HRESULT. handle, out and result may be NULL
 * when the function has no such output. */
HRESULT emu_call(const char *fn, int nargs, const char *const *args8, UINT64 *handle, PWSTR *out, PWSTR *result);

/* emu_utf8 converts a UTF-16 argument to a malloc'd UTF-8 string (NULL for
 * NULL); emu_guid formats a GUID (NULL for NULL) into buf[37]. */
char *emu_utf8(PCWSTR s);
const char *emu_guid(const GUID *g, char *buf);
#endif
