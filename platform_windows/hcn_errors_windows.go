//go:build windows

package hns

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
	"golang.org/x/sys/windows"
)

// The HNS error codes crossproxy branches on besides those hcsshim v0.15.0
// names. Each is the code as hcn keeps it (hcn.HcnError's code, which is
// hcserror.Win32FromError of the call's HRESULT): the generated syscalls turn
// a FACILITY_WIN32 HRESULT back into its Win32 code (0x80071392 → 0x1392)
// and keep the HCN facility's (0x803bxxxx) whole. The names are those of
// x/sys/windows and of microsoft/hnslib hcn/hcnerrors.go, which names the two
// not-found codes (HCN_E_NETWORK_NOT_FOUND, HCN_E_ENDPOINT_NOT_FOUND).
const (
	codeNetworkNotFound     = hcn.ErrorCode(windows.HCN_E_NETWORK_NOT_FOUND)  // 0x803b0001
	codeEndpointNotFound    = hcn.ErrorCode(windows.HCN_E_ENDPOINT_NOT_FOUND) // 0x803b0002
	codeAlreadyExists       = hcn.ErrorCode(windows.ERROR_ALREADY_EXISTS)     // 0xb7
	codeObjectAlreadyExists = hcn.ErrorCode(windows.ERROR_OBJECT_ALREADY_EXISTS)
	// codeInvalidReference is HCN_E_INVALID_JSON_REFERENCE: a load balancer
	// names an endpoint HNS does not have (kubernetes #100384: "The reference
	// is invalid in the JSON document. (0x803b001c)" on hcnCreateLoadBalancer).
	codeInvalidReference = hcn.ErrorCode(windows.HCN_E_INVALID_JSON_REFERENCE)
	// codeAddrInvalidOrReserved (HCN_E_ADDR_INVALID_OR_RESERVED, 0x803b002f)
	// and codeInvalidIP (HCN_E_INVALID_IP, 0x803b001e) are HNS refusing an
	// endpoint's address: the source VIP endpoint at an address HNS reserves,
	// or outside the network's subnets (kubernetes #100962, "Source Vip
	// endpoint creation failed ... An address provided is invalid or
	// reserved. (0x803b002f)").
	codeAddrInvalidOrReserved = hcn.ErrorCode(windows.HCN_E_ADDR_INVALID_OR_RESERVED)
	codeInvalidIP             = hcn.ErrorCode(windows.HCN_E_INVALID_IP)
)

// mapErr adds this package's sentinel errors to hcn's so callers can branch
// on them with errors.Is. It matches by code, not by message text, except
// where hcsshim gives no code: V1 API errors (hcsshim internal/hns hnsCall
// wraps an hcserror.HcsError, which neither hcn.CheckErrorWithCode nor
// errors.As can read) carry it only as "(0x…)" in their text.
func mapErr(err error) error {
	switch {
	case isNotFoundErr(err):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case hcn.IsPortAlreadyExistsError(err):
		return fmt.Errorf("%w: %w", ErrDuplicateFrontend, err)
	case hcn.IsNotImplemented(err):
		return fmt.Errorf("%w: %w", ErrNotImplemented, err)
	case hasCode(err, codeAlreadyExists), hasCode(err, codeObjectAlreadyExists):
		// 0xb7: an object HNS restored after a restart (kubernetes
		// #139519); 0x1392: an endpoint HNS already has (#74766).
		return fmt.Errorf("%w: %w", ErrAlreadyExists, err)
	case hasCode(err, codeAddrInvalidOrReserved), hasCode(err, codeInvalidIP):
		return fmt.Errorf("%w: HNS refused the endpoint's address as invalid, reserved or outside the network's subnets "+
			"(a source VIP must be a free address of this node's pod subnet, kubernetes #100962): %w", ErrInvalid, err)
	case hasCode(err, codeInvalidReference):
		return fmt.Errorf("%w: the load balancer references an endpoint HNS no longer has (kubernetes #100384): %w", ErrUnknownEndpoint, err)
	}
	return err
}

// isNotFoundErr recognises every way hcn and hcsshim say an object is not
// there: ERROR_NOT_FOUND (an object gone between hcn's enumeration and its
// query), HNS' own not-found codes, and the shims' lookup errors (V2's, and
// V1's GetHNSEndpointByName and GetHNSNetworkByName).
func isNotFoundErr(err error) bool {
	var v1Endpoint hcsshim.EndpointNotFoundError
	var v1Network hcsshim.NetworkNotFoundError
	return hcn.IsNotFoundError(err) || hcn.IsElementNotFoundError(err) ||
		hasCode(err, codeNetworkNotFound) || hasCode(err, codeEndpointNotFound) ||
		errors.As(err, &v1Endpoint) || errors.As(err, &v1Network)
}

// hasCode reports whether err carries HNS error code c: as hcn's error code,
// or, for the V1 API's errors that keep it only in their text, as
// hcserror.HcsError writes it, "(0x%x)".
func hasCode(err error, c hcn.ErrorCode) bool {
	return hcn.CheckErrorWithCode(err, c) || strings.Contains(strings.ToLower(err.Error()), fmt.Sprintf("(0x%x)", uint32(c)))
}
