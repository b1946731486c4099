/*
 * bcryptprimitives.dll for Wine 8, which lacks it: Go >= 1.24's Windows
 * runtime loads ProcessPrng from it at start and aborts without it. This
 * exports only ProcessPrng, filled from advapi32's RtlGenRandom
 * (SystemFunction036). Test-only: never shipped.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, chunk))
			return FALSE;
		data += chunk;
		len -= chunk;
	}
	return TRUE;
}
