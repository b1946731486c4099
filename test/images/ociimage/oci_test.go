package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func writeBin(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSpec(t *testing.T, v string) imageSpec {
	t.Helper()
	s, err := parseImageSpec(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// layerEntries gunzips and lists a layer: name -> content ("" for dirs).
func layerEntries(t *testing.T, gz []byte) (map[string]string, []byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 == 0 {
			t.Errorf("%s is not executable (mode %o)", h.Name, h.Mode)
		}
	}
	return out, raw
}

func TestBuildIndexPlatformsEntrypointsLayers(t *testing.T) {
	lin := writeBin(t, "lin", "linux-amd64-binary")
	arm := writeBin(t, "arm", "linux-arm64-binary")
	win := writeBin(t, "win.exe", "windows-binary")
	specs := []imageSpec{
		mustSpec(t, "linux/amd64="+lin+":/usr/local/bin/crossproxy"),
		mustSpec(t, "linux/arm64="+arm+":/usr/local/bin/crossproxy"),
		mustSpec(t, "windows/amd64="+win+":crossproxy.exe"),
	}
	l, err := build(specs, buildOptions{Ref: "registry.test:5000/x/crossproxy:v1", Created: time.Unix(1700000000, 0), Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	var idx index
	decode(t, l.blobs[l.indexDigest], &idx)
	if idx.MediaType != mediaIndex || idx.SchemaVersion != 2 || len(idx.Manifests) != 3 {
		t.Fatalf("index = %+v", idx)
	}
	if idx.Annotations[annotVersion] != "v1" || idx.Annotations[annotCreated] != "2023-11-14T22:13:20Z" {
		t.Errorf("index annotations = %v", idx.Annotations)
	}
	want := []struct {
		plat       platform
		entrypoint string
		file       string
		content    string
		dirs       []string
	}{
		{platform{"amd64", "linux", ""}, "/usr/local/bin/crossproxy", "usr/local/bin/crossproxy", "linux-amd64-binary", []string{"usr/", "usr/local/", "usr/local/bin/"}},
		{platform{"arm64", "linux", ""}, "/usr/local/bin/crossproxy", "usr/local/bin/crossproxy", "linux-arm64-binary", []string{"usr/", "usr/local/", "usr/local/bin/"}},
		// A HostProcess image runs on any Windows version, so its platform
		// has no os.version: containerd then matches it on every host.
		{platform{"amd64", "windows", ""}, "crossproxy.exe", "Files/crossproxy.exe", "windows-binary", []string{"Files/", "Hives/"}},
	}
	for i, w := range want {
		d := idx.Manifests[i]
		if d.MediaType != mediaManifest || d.Platform == nil || *d.Platform != w.plat {
			t.Fatalf("manifest %d descriptor = %+v, want platform %+v", i, d, w.plat)
		}
		if got := digestOf(l.blobs[d.Digest]); got != d.Digest || int64(len(l.blobs[d.Digest])) != d.Size {
			t.Fatalf("manifest %d: blob digest %s size %d, descriptor %s %d", i, got, len(l.blobs[d.Digest]), d.Digest, d.Size)
		}
		var m manifest
		decode(t, l.blobs[d.Digest], &m)
		if m.Config.MediaType != mediaConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != mediaLayer {
			t.Fatalf("manifest %d = %+v", i, m)
		}
		var cfg imageConfig
		decode(t, l.blobs[m.Config.Digest], &cfg)
		if cfg.OS != w.plat.OS || cfg.Architecture != w.plat.Architecture || cfg.OSVersion != w.plat.OSVersion {
			t.Errorf("config %d platform = %s/%s/%s", i, cfg.OS, cfg.Architecture, cfg.OSVersion)
		}
		if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{w.entrypoint}) {
			t.Errorf("config %d entrypoint = %v, want [%s]", i, cfg.Config.Entrypoint, w.entrypoint)
		}
		entries, raw := layerEntries(t, l.blobs[m.Layers[0].Digest])
		if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digestOf(raw) {
			t.Errorf("config %d diff_ids = %v, want [%s]", i, cfg.RootFS.DiffIDs, digestOf(raw))
		}
		if entries[w.file] != w.content || len(entries) != len(w.dirs)+1 {
			t.Errorf("layer %d entries = %v, want %s and dirs %v", i, entries, w.file, w.dirs)
		}
		for _, dir := range w.dirs {
			if _, ok := entries[dir]; !ok {
				t.Errorf("layer %d lacks directory %s", i, dir)
			}
		}
	}
}

func TestBuildIsReproducible(t *testing.T) {
	lin := writeBin(t, "lin", "same")
	specs := []imageSpec{mustSpec(t, "linux/amd64="+lin+":/bin/x")}
	o := buildOptions{Ref: "x:1", Created: time.Unix(5, 0)}
	a, err := build(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.indexDigest != b.indexDigest {
		t.Errorf("two builds of the same input: %s != %s", a.indexDigest, b.indexDigest)
	}
	o.Created = time.Unix(6, 0)
	c, err := build(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	if c.indexDigest == a.indexDigest {
		t.Error("a different creation time gave the same digest")
	}
}

func TestParseImageSpecRejectsBadInput(t *testing.T) {
	for _, v := range []string{
		"linux/amd64",                   // no binary
		"linux=bin:/x",                  // no arch
		"linux/amd64=bin",               // no path
		"linux/amd64=bin:",              // empty path
		"linux/amd64=bin:relative",      // Linux path must be absolute
		"linux/amd64/10.0=bin:/x",       // OS version on Linux
		`windows/amd64=b.exe:C:\x.exe`,  // Windows path with a drive
		"windows/amd64=b.exe:/x.exe",    // Windows path from /
		"windows/amd64/1/2=b.exe:x.exe", // too many platform parts
		"/amd64=bin:/x",                 // empty OS
	} {
		if _, err := parseImageSpec(v); err == nil {
			t.Errorf("parseImageSpec(%q) accepted", v)
		}
	}
	s, err := parseImageSpec("windows/amd64/10.0.17763.1=b.exe:dir/x.exe")
	if err != nil || s.OSVersion != "10.0.17763.1" || s.Path != "dir/x.exe" || s.Binary != "b.exe" {
		t.Errorf("windows with os.version: %+v, %v", s, err)
	}
}

func TestBuildRejectsMissingTagDuplicatesAndMissingBinary(t *testing.T) {
	lin := writeBin(t, "lin", "x")
	s := mustSpec(t, "linux/amd64="+lin+":/x")
	if _, err := build([]imageSpec{s}, buildOptions{Ref: "registry:5000/x"}); err == nil {
		t.Error("a reference without a tag was accepted")
	}
	if _, err := build([]imageSpec{s, s}, buildOptions{Ref: "x:1"}); err == nil {
		t.Error("a platform given twice was accepted")
	}
	if _, err := build([]imageSpec{mustSpec(t, "linux/amd64=/nonexistent/bin:/x")}, buildOptions{Ref: "x:1"}); err == nil {
		t.Error("a missing binary was accepted")
	}
}

// The directory and the tar hold the same layout, named for ctr import.
func TestWriteDirAndTar(t *testing.T) {
	lin := writeBin(t, "lin", "x")
	l, err := build([]imageSpec{mustSpec(t, "linux/amd64="+lin+":/x")}, buildOptions{Ref: "example.test/a/b:v2"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := l.writeDir(dir); err != nil {
		t.Fatal(err)
	}
	tarFile := filepath.Join(t.TempDir(), "img.tar")
	if err := l.writeTar(tarFile); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(tarFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		n++
		fromTar, _ := io.ReadAll(tr)
		fromDir, err := os.ReadFile(filepath.Join(dir, h.Name))
		if err != nil || !bytes.Equal(fromTar, fromDir) {
			t.Errorf("%s differs between tar and directory (%v)", h.Name, err)
		}
	}
	if n != 2+len(l.blobs) {
		t.Errorf("tar holds %d files, want %d", n, 2+len(l.blobs))
	}
	var top index
	b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	decode(t, b, &top)
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != l.indexDigest ||
		top.Manifests[0].Annotations[annotImageName] != "example.test/a/b:v2" || top.Manifests[0].Annotations[annotRefName] != "v2" {
		t.Errorf("index.json = %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "oci-layout")); string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", b)
	}
}
