/*
 * bcryptprimitives.dll for Wine 8, which lacks it: Go >= 1.24 binaries load
 * ProcessPrng from it at start and abort without it. ProcessPrng fills the
 * buffer from advapi32's RtlGenRandom (SystemFunction036), which Wine has.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
