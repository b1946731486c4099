package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// OCI media types and annotations used by the layout (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	annotRefName   = "org.opencontainers.image.ref.name"
	annotCreated   = "org.opencontainers.image.created"
	annotVersion   = "org.opencontainers.image.version"
	annotImageName = "io.containerd.image.name" // ctr images import names the image from this
)

// imageSpec is one platform's image: a single binary at a path, which is
// also the entrypoint.
type imageSpec struct {
	OS, Arch, OSVersion string
	Binary              string // file on the build host
	Path                string // path inside the image, e.g. /usr/local/bin/crossproxy or crossproxy.exe
	// Tree is a directory on the build host packed at the image root
	// around the binary (files, directories, symlinks), for images that need
	// a userland, such as agnhost's shell and network tools; Linux only.
	Tree string
}

// parseImageSpec reads OS/ARCH[/OSVERSION]=BINARY:PATH.
func parseImageSpec(v string) (imageSpec, error) {
	plat, rest, ok := strings.Cut(v, "=")
	if !ok {
		return imageSpec{}, fmt.Errorf("image %q: want OS/ARCH=BINARY:PATH", v)
	}
	i := strings.LastIndex(rest, ":")
	if i <= 0 || i == len(rest)-1 {
		return imageSpec{}, fmt.Errorf("image %q: want BINARY:PATH after =", v)
	}
	parts := strings.Split(plat, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return imageSpec{}, fmt.Errorf("image %q: platform must be OS/ARCH or OS/ARCH/OSVERSION", v)
	}
	s := imageSpec{OS: parts[0], Arch: parts[1], Binary: rest[:i], Path: rest[i+1:]}
	if len(parts) == 3 {
		if s.OS != "windows" {
			return imageSpec{}, fmt.Errorf("image %q: an OS version is only meaningful for windows", v)
		}
		s.OSVersion = parts[2]
	}
	if s.OS == "linux" && !strings.HasPrefix(s.Path, "/") {
		return imageSpec{}, fmt.Errorf("image %q: a Linux path must be absolute", v)
	}
	if s.OS == "windows" && (strings.ContainsAny(s.Path, `:\`) || strings.HasPrefix(s.Path, "/")) {
		return imageSpec{}, fmt.Errorf("image %q: a Windows path is relative to the image root, with /", v)
	}
	return s, nil
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	OSVersion    string `json:"os.version,omitempty"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type runConfig struct {
	Entrypoint []string `json:"Entrypoint"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type imageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	OSVersion    string    `json:"os.version,omitempty"`
	Config       runConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

type buildOptions struct {
	Ref     string
	Created time.Time
	Version string
	Cmd     []string // the image's default arguments to the entrypoint
}

// layout is a built image: its blobs by digest and the index over the
// platform manifests.
type layout struct {
	ref         string
	blobs       map[string][]byte
	indexDigest string
	indexSize   int64
	manifests   []descriptor
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (l *layout) add(mediaType string, b []byte) descriptor {
	d := digestOf(b)
	l.blobs[d] = b
	return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func (l *layout) addJSON(mediaType string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	return l.add(mediaType, b), nil
}

// build packs every spec into its own image and indexes them.
func build(specs []imageSpec, o buildOptions) (*layout, error) {
	if _, tag, ok := refTag(o.Ref); !ok || tag == "" {
		return nil, fmt.Errorf("reference %q has no tag", o.Ref)
	}
	seen := map[string]bool{}
	l := &layout{ref: o.Ref, blobs: map[string][]byte{}}
	created := o.Created.Format(time.RFC3339)
	for _, s := range specs {
		key := s.OS + "/" + s.Arch + "/" + s.OSVersion
		if seen[key] {
			return nil, fmt.Errorf("platform %s given twice", key)
		}
		seen[key] = true
		bin, err := os.ReadFile(s.Binary)
		if err != nil {
			return nil, fmt.Errorf("read binary for %s: %w", key, err)
		}
		raw, err := layerTar(s, bin, o.Created)
		if err != nil {
			return nil, fmt.Errorf("layer for %s: %w", key, err)
		}
		gz, err := gzipBytes(raw)
		if err != nil {
			return nil, fmt.Errorf("compress layer for %s: %w", key, err)
		}
		layer := l.add(mediaLayer, gz)
		cfg := imageConfig{Created: created, Architecture: s.Arch, OS: s.OS, OSVersion: s.OSVersion}
		cfg.RootFS.Type = "layers"
		cfg.RootFS.DiffIDs = []string{digestOf(raw)}
		by := "ociimage: " + path.Base(s.Binary) + " as " + s.Path
		if s.Tree != "" {
			by += " in " + filepath.Base(s.Tree)
		}
		cfg.History = []history{{Created: created, CreatedBy: by}}
		cfg.Config.Entrypoint = []string{s.Path}
		cfg.Config.Cmd = o.Cmd
		if s.OS == "linux" {
			cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		}
		cd, err := l.addJSON(mediaConfig, cfg)
		if err != nil {
			return nil, err
		}
		md, err := l.addJSON(mediaManifest, manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: cd, Layers: []descriptor{layer}})
		if err != nil {
			return nil, err
		}
		md.Platform = &platform{Architecture: s.Arch, OS: s.OS, OSVersion: s.OSVersion}
		l.manifests = append(l.manifests, md)
	}
	annots := map[string]string{annotCreated: created}
	if o.Version != "" {
		annots[annotVersion] = o.Version
	}
	id, err := l.addJSON(mediaIndex, index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: l.manifests, Annotations: annots})
	if err != nil {
		return nil, err
	}
	l.indexDigest, l.indexSize = id.Digest, id.Size
	return l, nil
}

// refTag splits name:tag; a port in the registry host is not a tag.
func refTag(ref string) (name, tag string, ok bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}

// layerTar is the single layer: the tree if there is one, the binary at its
// path, and the directories above it that the tree does not have. Windows
// layers keep files under Files/ and registry hives under Hives/ (the layout
// hcsshim imports); a HostProcess image has no hives, so Hives/ is empty.
// Entries are sorted by name so the same inputs give the same bytes.
func layerTar(s imageSpec, bin []byte, mtime time.Time) ([]byte, error) {
	entries := map[string]*tar.Header{}
	data := map[string][]byte{}
	if s.Tree != "" {
		if s.OS != "linux" {
			return nil, fmt.Errorf("a tree is only supported in Linux images, not %s", s.OS)
		}
		if err := readTree(s.Tree, mtime, entries, data); err != nil {
			return nil, err
		}
	}
	p := strings.TrimPrefix(s.Path, "/")
	if s.OS == "windows" {
		p = "Files/" + p
		entries["Hives/"] = dirHeader("Hives/", 0o755, mtime)
	}
	for _, n := range []string{p, p + "/"} {
		if _, ok := entries[n]; ok {
			return nil, fmt.Errorf("the binary's path %s is in the tree already (as %s)", s.Path, n)
		}
	}
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if h, ok := entries[d]; ok {
			return nil, fmt.Errorf("%s, a directory above the binary, is not a directory in the tree", h.Name)
		}
		if _, ok := entries[d+"/"]; !ok {
			entries[d+"/"] = dirHeader(d+"/", 0o755, mtime)
		}
	}
	entries[p] = &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: int64(len(bin)), ModTime: mtime, Format: tar.FormatPAX}
	data[p] = bin

	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(entries[n]); err != nil {
			return nil, fmt.Errorf("entry %s: %w", n, err)
		}
		if b, ok := data[n]; ok {
			if _, err := tw.Write(b); err != nil {
				return nil, fmt.Errorf("entry %s: %w", n, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func dirHeader(name string, mode int64, mtime time.Time) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: mtime, Format: tar.FormatPAX}
}

// readTree adds every file, directory and symlink under root to entries
// (directory names end in /), owned by root, with the given mtime so the
// host's timestamps do not leak into the digest. Other file types (devices,
// sockets, fifos) are refused: a container runtime makes its own /dev.
func readTree(root string, mtime time.Time, entries map[string]*tar.Header, data map[string][]byte) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("tree: %w", err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("tree: %w", err)
		}
		if rel == "." {
			return nil
		}
		name := filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("tree: %w", err)
		}
		mode := int64(info.Mode().Perm())
		if info.Mode()&os.ModeSticky != 0 {
			mode |= 0o1000 // /tmp's sticky bit
		}
		switch {
		case d.IsDir():
			entries[name+"/"] = dirHeader(name+"/", mode, mtime)
		case d.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("tree: %w", err)
			}
			entries[name] = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime, Format: tar.FormatPAX}
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("tree: %w", err)
			}
			entries[name] = &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: mtime, Format: tar.FormatPAX}
			data[name] = b
		default:
			return fmt.Errorf("tree: %s is a %v, not a file, directory or symlink", p, d.Type())
		}
		return nil
	})
}

// gzipBytes compresses without a name or time in the header, so the digest
// depends on the content only.
func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// files are the layout's files in a stable order: oci-layout, index.json,
// then the blobs by digest.
func (l *layout) files() ([]string, map[string][]byte, error) {
	_, tag, _ := refTag(l.ref)
	top := index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{{
		MediaType: mediaIndex, Digest: l.indexDigest, Size: l.indexSize,
		Annotations: map[string]string{annotImageName: l.ref, annotRefName: tag},
	}}}
	ib, err := json.Marshal(top)
	if err != nil {
		return nil, nil, fmt.Errorf("encode index.json: %w", err)
	}
	out := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": ib,
	}
	names := []string{"oci-layout", "index.json"}
	var digests []string
	for d := range l.blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		n := "blobs/sha256/" + strings.TrimPrefix(d, "sha256:")
		out[n] = l.blobs[d]
		names = append(names, n)
	}
	return names, out, nil
}

// writeDir writes the layout as a directory, replacing what was there.
func (l *layout) writeDir(dir string) error {
	names, data, err := l.files()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("replace %s: %w", dir, err)
	}
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write layout: %w", err)
		}
		if err := os.WriteFile(p, data[n], 0o644); err != nil {
			return fmt.Errorf("write layout: %w", err)
		}
	}
	return nil
}

// writeTar writes the layout as one tar file (atomically, via a rename).
func (l *layout) writeTar(file string) error {
	names, data, err := l.files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			f.Close()
			return fmt.Errorf("write archive: %w", err)
		}
	}
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data[n]))}); err != nil {
			f.Close()
			return fmt.Errorf("write archive: %w", err)
		}
		if _, err := tw.Write(data[n]); err != nil {
			f.Close()
			return fmt.Errorf("write archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("write archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return os.Rename(tmp, file)
}
