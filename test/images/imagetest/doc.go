// Package imagetest checks the image `make image` built, with the build tag
// image: run it through `make test-image`, which passes the paths in XP_*
// environment variables and needs root (it starts its own containerd).
package imagetest
