/* vmcompute.c: a stand-in for Windows' vmcompute.dll exporting only HNSCall,
 * HNS' V1 JSON API (hcsshim v0.15.0 internal/hns and hcn/zsyscall_windows.go:
 * HNSCall(method, path, object *uint16, response **uint16) HRESULT), through
 * which hcn's GetGlobals asks /globals/version and hcsshim's V1 functions
 * (GetHNSEndpointByName: GET /endpoints/) work. Forwarded to the emulator;
 * the response is a CoTaskMemAlloc'd UTF-16 string. */
#include <windows.h>
#include <stdlib.h>
#include "emuclient.h"

__declspec(dllexport) HRESULT WINAPI HNSCall(PCWSTR method, PCWSTR path, PCWSTR object, PWSTR *response) {
    char *m = emu_utf8(method), *p = emu_utf8(path), *o = emu_utf8(object);
    const char *args[3] = {m, p, o};
    HRESULT hr = emu_call("HNSCall", 3, args, NULL, response, NULL);
    free(m);
    free(p);
    free(o);
    return hr;
}
