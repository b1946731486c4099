// Command ociimage packs prebuilt static binaries into a multi-platform OCI
// image without a container daemon: one single-layer image per platform, an
// image index over them, written as an OCI image layout directory and as a tar
// of that layout, which `ctr images import` and `crane push` both read.
//
//	ociimage -ref REF -layout DIR -archive FILE \
//	  -image linux/amd64=bin/x:/usr/local/bin/x -image windows/amd64=x.exe:x.exe
//
// A Linux image can also carry a directory tree around its binary
// (-rootfs linux/amd64=DIR: a userland, e.g. a shell and network tools) and
// default arguments (-cmd '["pause"]').
//
// Everything is derived from the inputs and -created, so the same binaries
// give the same digests.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

type imageFlags []imageSpec

func (f *imageFlags) String() string { return fmt.Sprint(len(*f)) }

func (f *imageFlags) Set(v string) error {
	s, err := parseImageSpec(v)
	if err != nil {
		return err
	}
	*f = append(*f, s)
	return nil
}

// treeFlags maps a platform (OS/ARCH[/OSVERSION]) to the directory packed
// into that platform's image.
type treeFlags map[string]string

func (f treeFlags) String() string { return fmt.Sprint(len(f)) }

func (f treeFlags) Set(v string) error {
	plat, dir, ok := strings.Cut(v, "=")
	if !ok || plat == "" || dir == "" {
		return fmt.Errorf("rootfs %q: want OS/ARCH=DIR", v)
	}
	if _, dup := f[plat]; dup {
		return fmt.Errorf("rootfs for %s given twice", plat)
	}
	f[plat] = dir
	return nil
}

// withTrees gives each image the tree named for its platform; a tree for a
// platform with no image is an error, as it would be silently dropped.
func withTrees(images []imageSpec, trees treeFlags) ([]imageSpec, error) {
	used := map[string]bool{}
	out := make([]imageSpec, len(images))
	for i, s := range images {
		key := strings.TrimSuffix(s.OS+"/"+s.Arch+"/"+s.OSVersion, "/")
		s.Tree = trees[key]
		used[key] = s.Tree != ""
		out[i] = s
	}
	for plat := range trees {
		if !used[plat] {
			return nil, fmt.Errorf("rootfs for %s, which has no -image", plat)
		}
	}
	return out, nil
}

func main() {
	var (
		trees   = treeFlags{}
		images  imageFlags
		ref     = flag.String("ref", "", "image reference the index is tagged with (name:tag)")
		layout  = flag.String("layout", "", "OCI image layout directory to write (replaced)")
		archive = flag.String("archive", "", "tar of the OCI image layout to write, for ctr images import")
		created = flag.Int64("created", 0, "creation time, Unix seconds (e.g. the commit time), for reproducible digests")
		version = flag.String("version", "", "org.opencontainers.image.version annotation")
		cmd     = flag.String("cmd", "", `the image's default arguments as a JSON array, e.g. '["pause"]'`)
	)
	flag.Var(trees, "rootfs", "OS/ARCH=DIR: a directory tree (files, directories, symlinks) packed at that platform's image root; Linux only")
	flag.Var(&images, "image", "OS/ARCH[/OSVERSION]=BINARY:PATH_IN_IMAGE, repeated; PATH_IN_IMAGE is also the entrypoint")
	flag.Parse()
	if *ref == "" || len(images) == 0 || (*layout == "" && *archive == "") {
		fmt.Fprintln(os.Stderr, "ociimage: need -ref, at least one -image, and -layout or -archive")
		flag.Usage()
		os.Exit(2)
	}
	opts := buildOptions{Ref: *ref, Created: time.Unix(*created, 0).UTC(), Version: *version}
	if *cmd != "" {
		if err := json.Unmarshal([]byte(*cmd), &opts.Cmd); err != nil {
			fmt.Fprintf(os.Stderr, "ociimage: -cmd %q: want a JSON array of strings: %v\n", *cmd, err)
			os.Exit(2)
		}
	}
	specs, err := withTrees(images, trees)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(2)
	}
	l, err := build(specs, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
	if *layout != "" {
		if err := l.writeDir(*layout); err != nil {
			fmt.Fprintln(os.Stderr, "ociimage:", err)
			os.Exit(1)
		}
		fmt.Printf("ociimage: %s -> %s (index %s)\n", *ref, *layout, l.indexDigest)
	}
	if *archive != "" {
		if err := l.writeTar(*archive); err != nil {
			fmt.Fprintln(os.Stderr, "ociimage:", err)
			os.Exit(1)
		}
		fmt.Printf("ociimage: %s -> %s (index %s)\n", *ref, *archive, l.indexDigest)
	}
	for _, m := range l.manifests {
		fmt.Printf("ociimage:   %s %s\n", strings.TrimSuffix(m.Platform.OS+"/"+m.Platform.Architecture+"/"+m.Platform.OSVersion, "/"), m.Digest)
	}
}
