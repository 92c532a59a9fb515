/*
 * Stand-in for bcryptprimitives.dll, which Wine 8 (Debian 12's) does not ship.
 *
 * Rust's standard library (1.78+) imports ProcessPrng from bcryptprimitives.dll for its
 * hash-map seeds and random numbers, so without this every Rust test binary fails to load
 * under Wine 8 (c0000135). .ci/run builds it with mingw-w64 into the private Wine prefix's
 * system32; real Windows and Wine >= 9 have the genuine DLL and never see this file.
 * It forwards to RtlGenRandom (advapi32!SystemFunction036), the CSPRNG Rust used before.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
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
