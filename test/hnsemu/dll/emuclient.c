/* emuclient.c: see emuclient.h. Written for this project from the call
 * shapes in hcsshim v0.15.0 hcn/zsyscall_windows.go. */
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <objbase.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emuclient.h"

/* HRESULT_FROM_WIN32(RPC_S_SERVER_UNAVAILABLE): what a client of a stopped
 * service gets; returned when the emulator cannot be reached. */
#define EMU_E_UNREACHABLE ((HRESULT)0x800706BAL)
#define EMU_DEFAULT_ADDR "127.0.0.1:5895"
#define EMU_NULL 0xFFFFFFFFu

static INIT_ONCE wsa_once = INIT_ONCE_STATIC_INIT;

static BOOL CALLBACK wsa_init(PINIT_ONCE once, PVOID param, PVOID *ctx) {
    WSADATA d;
    (void)once; (void)param; (void)ctx;
    return WSAStartup(MAKEWORD(2, 2), &d) == 0;
}

char *emu_utf8(PCWSTR s) {
    int n;
    char *out;
    if (s == NULL) return NULL;
    n = WideCharToMultiByte(CP_UTF8, 0, s, -1, NULL, 0, NULL, NULL);
    if (n <= 0) n = 1;
    out = malloc((size_t)n);
    if (out == NULL) return NULL;
    if (WideCharToMultiByte(CP_UTF8, 0, s, -1, out, n, NULL, NULL) <= 0) out[0] = 0;
    return out;
}

const char *emu_guid(const GUID *g, char *buf) {
    if (g == NULL) return NULL;
    snprintf(buf, 37, "%08lx-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             (unsigned long)g->Data1, g->Data2, g->Data3, g->Data4[0], g->Data4[1], g->Data4[2],
             g->Data4[3], g->Data4[4], g->Data4[5], g->Data4[6], g->Data4[7]);
    return buf;
}

static int send_all(SOCKET s, const char *p, size_t n) {
    while (n > 0) {
        int k = send(s, p, n > 65536 ? 65536 : (int)n, 0);
        if (k <= 0) return 0;
        p += k;
        n -= (size_t)k;
    }
    return 1;
}

static int recv_all(SOCKET s, char *p, size_t n) {
    while (n > 0) {
        int k = recv(s, p, n > 65536 ? 65536 : (int)n, 0);
        if (k <= 0) return 0;
        p += k;
        n -= (size_t)k;
    }
    return 1;
}

static void put32(char *p, UINT32 v) {
    p[0] = (char)(v & 0xff); p[1] = (char)((v >> 8) & 0xff);
    p[2] = (char)((v >> 16) & 0xff); p[3] = (char)((v >> 24) & 0xff);
}

static UINT32 get32(const unsigned char *p) {
    return (UINT32)p[0] | ((UINT32)p[1] << 8) | ((UINT32)p[2] << 16) | ((UINT32)p[3] << 24);
}

static int send_field(SOCKET s, const char *v) {
    char len[4];
    size_t n = v ? strlen(v) : 0;
    put32(len, v ? (UINT32)n : EMU_NULL);
    if (!send_all(s, len, 4)) return 0;
    return v ? send_all(s, v, n) : 1;
}

/* recv_field reads one field; *out becomes a CoTaskMemAlloc'd UTF-16
 * string, or NULL for a NULL field or when the caller has no place for it. */
static int recv_field(SOCKET s, PWSTR *out) {
    unsigned char len[4];
    UINT32 n;
    char *buf;
    int w;
    PWSTR ws;
    if (out) *out = NULL;
    if (!recv_all(s, (char *)len, 4)) return 0;
    n = get32(len);
    if (n == EMU_NULL) return 1;
    if (n > (256u << 20)) return 0;
    buf = malloc((size_t)n + 1);
    if (buf == NULL) return 0;
    if (!recv_all(s, buf, n)) { free(buf); return 0; }
    buf[n] = 0;
    if (out) {
        w = MultiByteToWideChar(CP_UTF8, 0, buf, (int)n + 1, NULL, 0);
        ws = CoTaskMemAlloc((SIZE_T)(w > 0 ? w : 1) * sizeof(WCHAR));
        if (ws == NULL) { free(buf); return 0; }
        if (w <= 0 || MultiByteToWideChar(CP_UTF8, 0, buf, (int)n + 1, ws, w) <= 0) ws[0] = 0;
        *out = ws;
    }
    free(buf);
    return 1;
}

static SOCKET dial(void) {
    char addr[256], host[200];
    const char *colon;
    struct addrinfo hints, *res = NULL, *ai;
    SOCKET s = INVALID_SOCKET;
    DWORD n = GetEnvironmentVariableA("HNSEMU_ADDR", addr, sizeof addr);
    if (n == 0 || n >= sizeof addr) strcpy(addr, EMU_DEFAULT_ADDR);
    colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= sizeof host) return INVALID_SOCKET;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) return INVALID_SOCKET;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (s == INVALID_SOCKET) continue;
        if (connect(s, ai->ai_addr, (int)ai->ai_addrlen) == 0) break;
        closesocket(s);
        s = INVALID_SOCKET;
    }
    freeaddrinfo(res);
    return s;
}

HRESULT emu_call(const char *fn, int nargs, const char *const *args8, UINT64 *handle, PWSTR *out, PWSTR *result) {
    char node[128], cnt[4];
    unsigned char hdr[12];
    SOCKET s;
    int i, ok;
    HRESULT hr;
    DWORD n;
    if (out) *out = NULL;
    if (result) *result = NULL;
    if (!InitOnceExecuteOnce(&wsa_once, wsa_init, NULL, NULL)) return EMU_E_UNREACHABLE;
    n = GetEnvironmentVariableA("HNSEMU_NODE", node, sizeof node);
    if (n == 0 || n >= sizeof node) strcpy(node, "default");
    s = dial();
    if (s == INVALID_SOCKET) return EMU_E_UNREACHABLE;
    put32(cnt, (UINT32)(nargs + 2));
    ok = send_all(s, cnt, 4) && send_field(s, node) && send_field(s, fn);
    for (i = 0; ok && i < nargs; i++) ok = send_field(s, args8[i]);
    ok = ok && recv_all(s, (char *)hdr, 12);
    if (!ok) { closesocket(s); return EMU_E_UNREACHABLE; }
    hr = (HRESULT)get32(hdr);
    if (handle) *handle = (UINT64)get32(hdr + 4) | ((UINT64)get32(hdr + 8) << 32);
    ok = recv_field(s, out) && recv_field(s, result);
    closesocket(s);
    if (!ok) {
        if (out && *out) { CoTaskMemFree(*out); *out = NULL; }
        if (result && *result) { CoTaskMemFree(*result); *result = NULL; }
        return EMU_E_UNREACHABLE;
    }
    return hr;
}
