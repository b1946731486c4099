package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// The version command prints what a bug report needs: the stamped version
// (not a chart's placeholder), the commit, the Go version and the platform,
// with the first line in the form the image test and scripts parse.
func TestVersionCommandPrintsVersionCommitGoAndPlatform(t *testing.T) {
	oldVersion, oldCommit := version, commit
	t.Cleanup(func() { version, commit = oldVersion, oldCommit })
	version, commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"

	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatalf("version: %v", err)
	}
	want := []string{
		"crossproxy v1.2.3 " + runtime.GOOS + "/" + runtime.GOARCH,
		"commit: 0123456789abcdef0123456789abcdef01234567",
		"go: " + runtime.Version(),
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("version output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}

// Without a stamped commit the toolchain's VCS stamp or "unknown" is
// printed, never an empty field.
func TestBuildCommitFallsBackWhenNotStamped(t *testing.T) {
	old := commit
	t.Cleanup(func() { commit = old })
	commit = ""
	if got := buildCommit(); got == "" {
		t.Error("buildCommit() is empty without a stamped commit")
	}
	commit = "abc"
	if got := buildCommit(); got != "abc" {
		t.Errorf("buildCommit() = %q, want the stamped abc", got)
	}
}
