//go:build installer

package installer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSigning builds the MSI with a throwaway code-signing certificate, as
// `make sign CERT=... KEY=...` does, and checks with osslsigncode that both
// the MSI and the exe inside it carry valid signatures from that certificate,
// and that a flipped byte breaks the MSI's.
func TestSigning(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	run(t, "", "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
		"-keyout", key, "-out", cert, "-subj", "/CN=crossproxy test signing",
		"-addext", "extendedKeyUsage=codeSigning", "-addext", "keyUsage=digitalSignature")

	// msi.sh signs the exe in place, so give it a copy.
	src, err := os.ReadFile(windowsExe(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "crossproxy-signed.exe")
	if err := os.WriteFile(exe, src, 0o755); err != nil {
		t.Fatal(err)
	}
	msi := filepath.Join(dir, "signed.msi")
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "installer", "msi.sh"), exe,
		filepath.Join(RepoRoot(), "installer", "windows", "config.yaml"), "0.0.9", filepath.Join(dir, "stage"), msi)
	cmd.Env = append(os.Environ(), "CERT="+cert, "KEY="+key)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("msi.sh with CERT/KEY: %v\n%s", err, out)
	}

	verify := func(file string) error {
		return exec.Command("osslsigncode", "verify", "-CAfile", cert, "-in", file).Run()
	}
	if err := verify(exe); err != nil {
		t.Errorf("signed exe does not verify: %v", err)
	}
	if err := verify(msi); err != nil {
		t.Errorf("signed MSI does not verify: %v", err)
	}
	// The exe packed into the MSI is the signed one.
	extract := filepath.Join(dir, "extract")
	if err := os.MkdirAll(extract, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, extract, "msiextract", msi)
	var packed string
	_ = filepath.Walk(extract, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.EqualFold(info.Name(), "crossproxy.exe") {
			packed = p
		}
		return nil
	})
	if packed == "" {
		t.Fatal("no crossproxy.exe in the MSI")
	}
	if err := verify(packed); err != nil {
		t.Errorf("exe inside the MSI does not verify: %v", err)
	}

	// Tampering is caught.
	b, err := os.ReadFile(msi)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(dir, "tampered.msi")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := verify(bad); err == nil {
		t.Error("a tampered MSI verifies")
	}

	// Signing again replaces the signature instead of failing.
	cmd = exec.Command("bash", filepath.Join(RepoRoot(), "installer", "sign.sh"), msi)
	cmd.Env = append(os.Environ(), "CERT="+cert, "KEY="+key)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sign.sh on a signed MSI: %v\n%s", err, out)
	}
	if err := verify(msi); err != nil {
		t.Errorf("re-signed MSI does not verify: %v", err)
	}
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
