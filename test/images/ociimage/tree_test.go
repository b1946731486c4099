package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"syscall"
	"testing"
	"time"
)

// makeTree writes a small userland: a busybox with a shell symlinked to it,
// a config file, an empty directory, a library behind a relative symlink.
func makeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp", "lib/x86_64-linux-gnu"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	files := map[string]os.FileMode{"bin/busybox": 0o755, "etc/hosts": 0o644, "lib/x86_64-linux-gnu/libc.so.6": 0o755}
	for f, m := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte("content of "+f), m); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"bin/sh": "busybox", "lib64": "lib/x86_64-linux-gnu"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// layerHeaders gunzips a layer and returns its headers in order, and the
// regular files' contents by name.
func layerHeaders(t *testing.T, gz []byte) ([]*tar.Header, map[string]string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var hs []*tar.Header
	content := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs, content
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg {
			content[h.Name] = string(b)
		}
		hs = append(hs, h)
	}
}

func TestBuildPacksTreeAroundBinaryWithCmd(t *testing.T) {
	tree := makeTree(t)
	bin := writeBin(t, "agnhost", "agnhost-binary")
	s := mustSpec(t, "linux/amd64="+bin+":/agnhost")
	specs, err := withTrees([]imageSpec{s}, treeFlags{"linux/amd64": tree})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1700000000, 0)
	l, err := build(specs, buildOptions{Ref: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", Created: created, Cmd: []string{"pause"}})
	if err != nil {
		t.Fatal(err)
	}
	var idx index
	decode(t, l.blobs[l.indexDigest], &idx)
	var m manifest
	decode(t, l.blobs[idx.Manifests[0].Digest], &m)
	var cfg imageConfig
	decode(t, l.blobs[m.Config.Digest], &cfg)
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/agnhost"}) || !reflect.DeepEqual(cfg.Config.Cmd, []string{"pause"}) {
		t.Errorf("entrypoint %v cmd %v, want [/agnhost] [pause]", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	hs, content := layerHeaders(t, l.blobs[m.Layers[0].Digest])
	type entry struct {
		typ  byte
		mode int64
		link string
	}
	want := map[string]entry{
		"agnhost":                        {tar.TypeReg, 0o755, ""},
		"bin/":                           {tar.TypeDir, 0o755, ""},
		"bin/busybox":                    {tar.TypeReg, 0o755, ""},
		"bin/sh":                         {tar.TypeSymlink, 0o777, "busybox"},
		"etc/":                           {tar.TypeDir, 0o755, ""},
		"etc/hosts":                      {tar.TypeReg, 0o644, ""},
		"lib/":                           {tar.TypeDir, 0o755, ""},
		"lib/x86_64-linux-gnu/":          {tar.TypeDir, 0o755, ""},
		"lib/x86_64-linux-gnu/libc.so.6": {tar.TypeReg, 0o755, ""},
		"lib64":                          {tar.TypeSymlink, 0o777, "lib/x86_64-linux-gnu"},
		"tmp/":                           {tar.TypeDir, 0o1777, ""},
	}
	got := map[string]entry{}
	var names []string
	for _, h := range hs {
		got[h.Name] = entry{h.Typeflag, h.Mode, h.Linkname}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(created) {
			t.Errorf("%s: uid %d gid %d mtime %v, want root and the creation time", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer entries:\n got %v\nwant %v", got, want)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("entries not sorted: %v", names)
	}
	if content["agnhost"] != "agnhost-binary" || content["etc/hosts"] != "content of etc/hosts" {
		t.Errorf("file contents = %v", content)
	}
}

// The host's timestamps are not part of the image: touching the tree
// changes nothing, changing a file's content does.
func TestTreeDigestDependsOnContentOnly(t *testing.T) {
	tree := makeTree(t)
	bin := writeBin(t, "x", "x")
	specs := []imageSpec{mustSpec(t, "linux/amd64="+bin+":/x")}
	specs[0].Tree = tree
	o := buildOptions{Ref: "x:1", Created: time.Unix(5, 0)}
	a, err := build(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(tree, "etc/hosts"), later, later); err != nil {
		t.Fatal(err)
	}
	b, err := build(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.indexDigest != b.indexDigest {
		t.Errorf("touching a file changed the digest: %s != %s", a.indexDigest, b.indexDigest)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc/hosts"), []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := build(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	if c.indexDigest == a.indexDigest {
		t.Error("a changed file gave the same digest")
	}
}

func TestTreeConflictsAreRefused(t *testing.T) {
	bin := writeBin(t, "x", "x")
	try := func(path string, tree string, os string) error {
		s := mustSpec(t, os+"/amd64="+bin+":"+path)
		s.Tree = tree
		_, err := build([]imageSpec{s}, buildOptions{Ref: "x:1"})
		return err
	}
	tree := makeTree(t)
	if err := try("/bin/busybox", tree, "linux"); err == nil {
		t.Error("a binary at a path the tree has was accepted")
	}
	if err := try("/etc", tree, "linux"); err == nil {
		t.Error("a binary at a directory of the tree was accepted")
	}
	if err := try("/lib64/x", tree, "linux"); err == nil {
		t.Error("a binary under a symlink of the tree was accepted")
	}
	if err := try("x.exe", tree, "windows"); err == nil {
		t.Error("a tree in a Windows image was accepted")
	}
	if err := try("/usr/bin/x", filepath.Join(tree, "missing"), "linux"); err == nil {
		t.Error("a missing tree was accepted")
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := try("/usr/bin/x", tree, "linux"); err == nil {
		t.Error("a tree with a fifo was accepted")
	}
}

func TestRootfsFlags(t *testing.T) {
	f := treeFlags{}
	for _, bad := range []string{"linux/amd64", "=dir", "linux/amd64="} {
		if err := f.Set(bad); err == nil {
			t.Errorf("-rootfs %q accepted", bad)
		}
	}
	if err := f.Set("linux/amd64=/a"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("linux/amd64=/b"); err == nil {
		t.Error("a second rootfs for the same platform was accepted")
	}
	specs := []imageSpec{mustSpec(t, "linux/amd64=b:/x"), mustSpec(t, "linux/arm64=b:/x")}
	got, err := withTrees(specs, f)
	if err != nil || got[0].Tree != "/a" || got[1].Tree != "" {
		t.Errorf("withTrees = %+v, %v", got, err)
	}
	if _, err := withTrees(specs[1:], f); err == nil {
		t.Error("a rootfs for a platform without an image was accepted")
	}
}
