//go:build windows

package main

import _ "golang.org/x/sys/windows/svc"
