// Command hnsemu runs the HNS emulator (package test/hnsemu): the DLL
// stand-ins' listener and the control API, until interrupted.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/crossproxy/crossproxy/test/hnsemu"
)

func main() {
	dll := flag.String("dll-listen", hnsemu.DefaultAddr, "address the computenetwork.dll/vmcompute.dll stand-ins call (their HNSEMU_ADDR)")
	control := flag.String("control-listen", "127.0.0.1:5896", "address of the control API (HTTP)")
	profile := flag.String("profile", hnsemu.DefaultProfile, "release profile of the node \"default\": ws2019, ws2022, ws2025, ws2025-15.5")
	flag.Parse()
	s, err := hnsemu.Start(*dll, *control)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := s.SetProfile("default", *profile, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("hnsemu: DLLs call %s, control API http://%s\n", s.DLLAddr, s.ControlAddr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	_ = s.Close()
}
