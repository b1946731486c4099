// Command ociimage packs prebuilt static binaries into a multi-platform OCI
// image without a container daemon: one single-layer image per platform, an
// image index over them, written as an OCI image layout directory and as a tar
// of that layout, which `ctr images import` and `crane push` both read.
//
//	ociimage -ref REF -layout DIR -archive FILE \
//	  -image linux/amd64=bin/x:/usr/local/bin/x -image windows/amd64=x.exe:x.exe
//
// Everything is derived from the inputs and -created, so the same binaries
// give the same digests.
package main

import (
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

func main() {
	var (
		images  imageFlags
		ref     = flag.String("ref", "", "image reference the index is tagged with (name:tag)")
		layout  = flag.String("layout", "", "OCI image layout directory to write (replaced)")
		archive = flag.String("archive", "", "tar of the OCI image layout to write, for ctr images import")
		created = flag.Int64("created", 0, "creation time, Unix seconds (e.g. the commit time), for reproducible digests")
		version = flag.String("version", "", "org.opencontainers.image.version annotation")
	)
	flag.Var(&images, "image", "OS/ARCH[/OSVERSION]=BINARY:PATH_IN_IMAGE, repeated; PATH_IN_IMAGE is also the entrypoint")
	flag.Parse()
	if *ref == "" || len(images) == 0 || (*layout == "" && *archive == "") {
		fmt.Fprintln(os.Stderr, "ociimage: need -ref, at least one -image, and -layout or -archive")
		flag.Usage()
		os.Exit(2)
	}
	opts := buildOptions{Ref: *ref, Created: time.Unix(*created, 0).UTC(), Version: *version}
	l, err := build(images, opts)
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
