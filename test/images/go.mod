// Module images builds container images without a container daemon: the
// crossproxy multi-platform image (ociimage) and the small static images the
// test cluster runs (pause, netecho). Its own module so the root module's
// tests and dependencies stay as they are; it needs only the standard library.
module github.com/crossproxy/crossproxy/test/images

go 1.26.8
