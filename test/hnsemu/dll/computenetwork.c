/* computenetwork.c: a stand-in for Windows' computenetwork.dll (the HCN API)
 * that forwards every call to the HNS emulator (test/hnsemu). The exported
 * functions and their parameters are those hcsshim v0.15.0 declares in
 * hcn/zsyscall_windows.go (mkwinsyscall output): handles are opaque
 * pointers, strings UTF-16, results CoTaskMemAlloc'd. Written for this
 * project; no Windows SDK header is needed beyond mingw's. */
#include <windows.h>
#include <stdlib.h>
#include "emuclient.h"

#define EXPORT __declspec(dllexport)

static void handle_str(void *h, char *buf) {
    /* A handle is sent as the decimal number the emulator gave out. */
    unsigned long long v = (unsigned long long)(ULONG_PTR)h;
    char tmp[24];
    int i = 0, j = 0;
    do { tmp[i++] = (char)('0' + v % 10); v /= 10; } while (v > 0);
    while (i > 0) buf[j++] = tmp[--i];
    buf[j] = 0;
}

static HRESULT enumerate(const char *fn, PCWSTR query, PWSTR *list, PWSTR *result) {
    char *q = emu_utf8(query);
    const char *args[1] = {q};
    HRESULT hr = emu_call(fn, 1, args, NULL, list, result);
    free(q);
    return hr;
}

static HRESULT open_obj(const char *fn, const GUID *id, void **h, PWSTR *result) {
    char g[37];
    const char *args[1] = {emu_guid(id, g)};
    UINT64 v = 0;
    HRESULT hr = emu_call(fn, 1, args, &v, NULL, result);
    if (h) *h = SUCCEEDED(hr) ? (void *)(ULONG_PTR)v : NULL;
    return hr;
}

static HRESULT create_obj(const char *fn, void *parent, const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    char g[37], p[24];
    char *s = emu_utf8(settings);
    const char *args[3];
    int n = 0;
    UINT64 v = 0;
    HRESULT hr;
    if (parent != NULL) { handle_str(parent, p); args[n++] = p; }
    args[n++] = emu_guid(id, g);
    args[n++] = s;
    hr = emu_call(fn, n, args, &v, NULL, result);
    if (h) *h = SUCCEEDED(hr) ? (void *)(ULONG_PTR)v : NULL;
    free(s);
    return hr;
}

static HRESULT query_obj(const char *fn, void *h, PCWSTR query, PWSTR *props, PWSTR *result) {
    char p[24];
    char *q = emu_utf8(query);
    const char *args[2] = {p, q};
    HRESULT hr;
    handle_str(h, p);
    hr = emu_call(fn, 2, args, NULL, props, result);
    free(q);
    return hr;
}

static HRESULT modify_obj(const char *fn, void *h, PCWSTR settings, PWSTR *result) {
    char p[24];
    char *s = emu_utf8(settings);
    const char *args[2] = {p, s};
    HRESULT hr;
    handle_str(h, p);
    hr = emu_call(fn, 2, args, NULL, NULL, result);
    free(s);
    return hr;
}

static HRESULT delete_obj(const char *fn, const GUID *id, PWSTR *result) {
    char g[37];
    const char *args[1] = {emu_guid(id, g)};
    return emu_call(fn, 1, args, NULL, NULL, result);
}

static HRESULT close_obj(const char *fn, void *h) {
    char p[24];
    const char *args[1] = {p};
    handle_str(h, p);
    return emu_call(fn, 1, args, NULL, NULL, NULL);
}

/* One family of exports per HCN object kind: Enumerate, Open, Create,
 * Query…Properties, Modify, Delete, Close. */
#define HCN_FAMILY(Kind)                                                                          \
    EXPORT HRESULT WINAPI HcnEnumerate##Kind##s(PCWSTR query, PWSTR *list, PWSTR *result) {       \
        return enumerate("HcnEnumerate" #Kind "s", query, list, result);                          \
    }                                                                                             \
    EXPORT HRESULT WINAPI HcnOpen##Kind(const GUID *id, void **h, PWSTR *result) {                \
        return open_obj("HcnOpen" #Kind, id, h, result);                                          \
    }                                                                                             \
    EXPORT HRESULT WINAPI HcnQuery##Kind##Properties(void *h, PCWSTR query, PWSTR *props, PWSTR *result) { \
        return query_obj("HcnQuery" #Kind "Properties", h, query, props, result);                 \
    }                                                                                             \
    EXPORT HRESULT WINAPI HcnModify##Kind(void *h, PCWSTR settings, PWSTR *result) {              \
        return modify_obj("HcnModify" #Kind, h, settings, result);                                \
    }                                                                                             \
    EXPORT HRESULT WINAPI HcnDelete##Kind(const GUID *id, PWSTR *result) {                        \
        return delete_obj("HcnDelete" #Kind, id, result);                                         \
    }                                                                                             \
    EXPORT HRESULT WINAPI HcnClose##Kind(void *h) { return close_obj("HcnClose" #Kind, h); }

HCN_FAMILY(Network)
HCN_FAMILY(Endpoint)
HCN_FAMILY(LoadBalancer)
HCN_FAMILY(Namespace)
HCN_FAMILY(SdnRoute)

EXPORT HRESULT WINAPI HcnCreateNetwork(const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    return create_obj("HcnCreateNetwork", NULL, id, settings, h, result);
}
EXPORT HRESULT WINAPI HcnCreateEndpoint(void *network, const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    /* The network handle is always sent, even a NULL one ("0"). */
    char g[37], p[24];
    char *s = emu_utf8(settings);
    const char *args[3] = {p, emu_guid(id, g), s};
    UINT64 v = 0;
    HRESULT hr;
    handle_str(network, p);
    hr = emu_call("HcnCreateEndpoint", 3, args, &v, NULL, result);
    if (h) *h = SUCCEEDED(hr) ? (void *)(ULONG_PTR)v : NULL;
    free(s);
    return hr;
}
EXPORT HRESULT WINAPI HcnCreateLoadBalancer(const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    return create_obj("HcnCreateLoadBalancer", NULL, id, settings, h, result);
}
EXPORT HRESULT WINAPI HcnCreateNamespace(const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    return create_obj("HcnCreateNamespace", NULL, id, settings, h, result);
}
EXPORT HRESULT WINAPI HcnCreateSdnRoute(const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    return create_obj("HcnCreateSdnRoute", NULL, id, settings, h, result);
}
