//go:build windows

package hns

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
	"golang.org/x/sys/windows"
)

// hcsError builds hcsshim's internal hcserror.HcsError as hcserror.New makes
// it for a failed call: title, the HNS JSON result, and the call's error as
// the generated syscall returns it (an HRESULT of FACILITY_WIN32 reduced to
// its Win32 code, hcn/zsyscall_windows.go). hcsshim exports no constructor,
// so the type is reached through hcn.HcnError's embedded field and its
// unexported fields are set through reflect and unsafe; a layout change in
// hcsshim makes this helper panic rather than build a different error.
func hcsError(title string, hresult uint32, rest string) (reflect.Value, windows.Errno) {
	if hresult&0x1fff0000 == 0x00070000 {
		hresult &= 0xffff
	}
	errno := windows.Errno(hresult)
	field, ok := reflect.TypeOf(hcn.HcnError{}).FieldByName("HcsError")
	if !ok {
		panic("hcsshim's hcn.HcnError no longer embeds HcsError")
	}
	h := reflect.New(field.Type.Elem())
	setUnexported(h.Elem().FieldByName("title"), title)
	setUnexported(h.Elem().FieldByName("rest"), rest)
	h.Elem().FieldByName("Err").Set(reflect.ValueOf(errno))
	return h, errno
}

// hcnErr is the error hcn returns for a failed V2 call (hcn/hcnerrors.go
// checkForErrors and new): an *hcn.HcnError whose code is the call's code.
func hcnErr(title string, hresult uint32, rest string) error {
	h, errno := hcsError(title, hresult, rest)
	e := &hcn.HcnError{}
	v := reflect.ValueOf(e).Elem()
	v.FieldByName("HcsError").Set(h)
	setUnexported(v.FieldByName("code"), hcn.ErrorCode(errno))
	if !hcn.CheckErrorWithCode(e, hcn.ErrorCode(errno)) {
		panic("hcn.CheckErrorWithCode does not read the code set")
	}
	return e
}

// v1Err is the error the V1 API returns for a failed HNS call (hcsshim
// internal/hns hnsfuncs.go hnsCall): the HcsError wrapped with fmt.Errorf,
// with no hcn code to read.
func v1Err(hresult uint32) error {
	h, _ := hcsError("hnsCall ", hresult, "")
	return fmt.Errorf("failed during hnsCallRawResponse: %w", h.Interface().(error))
}

func setUnexported(f reflect.Value, v any) {
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(v))
}

// TestHCNErrorCodes maps HNS' errors, built as hcsshim builds them, to this
// package's sentinels by their code. The JSON results are those the issues
// quote.
func TestHCNErrorCodes(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		want     error
		inText   string // what the mapped error must say besides hcn's text
		wantCode string // how hcsshim prints the code in the text
	}{
		{"HCN_E_NETWORK_NOT_FOUND on delete", hcnErr("hcnOpenNetwork", 0x803b0001, ""), ErrNotFound, "", "(0x803b0001)"},
		{"HCN_E_ENDPOINT_NOT_FOUND on delete", hcnErr("hcnOpenEndpoint", 0x803b0002, ""), ErrNotFound, "", "(0x803b0002)"},
		{"ERROR_NOT_FOUND between enumerate and query", hcnErr("hcnOpenEndpoint", 0x80070490, ""), ErrNotFound, "", "(0x490)"},
		{"V2 lookup by name", fmt.Errorf("get: %w", hcn.EndpointNotFoundError{EndpointName: "Calico_ep"}), ErrNotFound, "", ""},
		{"V1 lookup by name", hcsshim.EndpointNotFoundError{EndpointName: "Calico_ep"}, ErrNotFound, "", ""},
		{"V1 network lookup", hcsshim.NetworkNotFoundError{NetworkName: "Calico"}, ErrNotFound, "", ""},
		{"V1 call, ERROR_NOT_FOUND", v1Err(0x80070490), ErrNotFound, "", "(0x490)"},
		// kubernetes #74766: "hnsCall failed in Win32: The object already exists. (0x1392)".
		{"ERROR_OBJECT_ALREADY_EXISTS on endpoint create", hcnErr("hcnCreateEndpoint", 0x80071392,
			`{"Success":false,"Error":"The object already exists. ","ErrorCode":2147947410}`), ErrAlreadyExists, "", "(0x1392)"},
		{"ERROR_OBJECT_ALREADY_EXISTS through V1", v1Err(0x80071392), ErrAlreadyExists, "", "(0x1392)"},
		// kubernetes #139519: a load balancer HNS restored after its restart.
		{"ERROR_ALREADY_EXISTS on load balancer create", hcnErr("hcnCreateLoadBalancer", 0x800700b7, ""), ErrAlreadyExists, "", "(0xb7)"},
		// kubernetes #100962: the source VIP endpoint refused.
		{"HCN_E_ADDR_INVALID_OR_RESERVED", hcnErr("hcnCreateEndpoint", 0x803b002f,
			`{"Success":false,"Error":"An address provided is invalid or reserved. ","ErrorCode":2151350319}`), ErrInvalid, "invalid, reserved or outside the network's subnets", "(0x803b002f)"},
		{"HCN_E_INVALID_IP", hcnErr("hcnCreateEndpoint", 0x803b001e, ""), ErrInvalid, "invalid, reserved or outside the network's subnets", "(0x803b001e)"},
		// kubernetes #100384: "The reference is invalid in the JSON document. (0x803b001c)".
		{"HCN_E_INVALID_JSON_REFERENCE on load balancer create", hcnErr("hcnCreateLoadBalancer", 0x803b001c,
			`{"Success":false,"Error":"The reference is invalid in the JSON document. A Reference is required","ErrorCode":2151350300}`), ErrUnknownEndpoint, "no longer has", "(0x803b001c)"},
		{"HCN_E_PORT_ALREADY_EXISTS", hcnErr("hcnCreateLoadBalancer", 0x803b0013, ""), ErrDuplicateFrontend, "", "(0x803b0013)"},
		{"E_NOTIMPL on modify", hcnErr("hcnModifyLoadBalancer", 0x80004001, ""), ErrNotImplemented, "", "(0x80004001)"},
	} {
		if c.wantCode != "" && !strings.Contains(c.err.Error(), c.wantCode) {
			t.Errorf("%s: the built error %q does not print %s as hcsshim does", c.name, c.err, c.wantCode)
		}
		got := mapErr(c.err)
		if !errors.Is(got, c.want) || !strings.Contains(got.Error(), c.inText) || !strings.Contains(got.Error(), c.err.Error()) {
			t.Errorf("%s: %v, want %v saying %q", c.name, got, c.want, c.inText)
		}
		for _, other := range []error{ErrNotFound, ErrAlreadyExists, ErrInvalid, ErrUnknownEndpoint, ErrDuplicateFrontend, ErrNotImplemented} {
			if other != c.want && errors.Is(got, other) {
				t.Errorf("%s: also %v", c.name, other)
			}
		}
	}
	// Codes crossproxy does not branch on pass through unchanged.
	for _, err := range []error{hcnErr("hcnCreateEndpoint", 0x803b000d, ""), v1Err(0x803b0007), errors.New("HNS failed with error : something")} {
		if got := mapErr(err); got != err {
			t.Errorf("%v: mapped to %v", err, got)
		}
	}
}
