package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/platform/debug"
)

// bundleOptions configure `crossproxy bundle`.
type bundleOptions struct {
	remote  remoteOptions
	out     string
	timeout time.Duration
	now     func() time.Time
}

func newBundleCommand() *cobra.Command {
	bo := &bundleOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Write one tarball for a bug report: every node's status, explain of each Service with a mismatch, programmed state, logs, metrics, config",
		Long: `bundle collects, through the API server as crossproxy status does, from every
node's proxy:
  status.json            the node's status (as crossproxy status -o json shows it)
  explain-mismatch.json  the explain report of every Service with a mismatch on the node
  reports.json           the explain report of every Service: the programmed state read back
  state.json             the state the proxy computed in its last successful sync
  logs.txt               the proxy's last 500 log lines
  metrics.txt            its Prometheus metrics
  config.json            the configuration in force
and, for the cluster, status.json (every node's row) and versions.txt. The configuration
holds paths, never credentials; the token used is not written. A node whose proxy cannot
be asked gets errors.txt instead, and the bundle is still written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bo.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	bo.remote.bind(f, true, 150*time.Second)
	f.StringVarP(&bo.out, "output-file", "f", "", "the tarball to write (default crossproxy-bundle-TIME.tar.gz in this directory)")
	f.DurationVar(&bo.timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

// bundleFile is one file of the tarball.
type bundleFile struct {
	name string
	data []byte
}

// nodeFiles are what bundle asks each proxy for, by file name; its
// status.json is the row status already asked for, not asked again.
var nodeFiles = []struct {
	name, path string
	params     map[string]string
}{
	{"explain-mismatch.json", debug.ReportsPath, map[string]string{"mismatch": "1"}},
	{"reports.json", debug.ReportsPath, nil},
	{"state.json", debug.StatePath, nil},
	{"logs.txt", debug.LogsPath, nil},
	{"metrics.txt", debug.MetricsPath, nil},
	{"config.json", debug.ConfigPath, nil},
}

func (bo *bundleOptions) run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, bo.timeout)
	defer cancel()
	stamp := bo.now().UTC().Format("20060102T150405Z")
	if bo.out == "" {
		bo.out = "crossproxy-bundle-" + stamp + ".tar.gz"
	}
	r, proxies, err := bo.remote.connect(ctx)
	if err != nil {
		return err
	}
	rows := collectStatus(ctx, r, proxies, &bo.remote)
	root := "crossproxy-bundle-" + stamp
	var mu sync.Mutex
	files := []bundleFile{
		{path.Join(root, "status.json"), mustJSON(rows)},
		{path.Join(root, "versions.txt"), []byte(bundleVersions(rows))},
	}
	failed := 0
	rowOf := map[string]nodeRow{}
	for _, r := range rows {
		rowOf[r.Node] = r
	}
	bo.remote.each(proxies, func(_ int, px debug.Proxy) {
		var got []bundleFile
		var errs []string
		row := rowOf[px.Node]
		ask := nodeFiles
		if row.Status == nil {
			// Its status could not be had (no pod, or no answer within
			// --node-timeout): the rest would not come either.
			errs = append(errs, row.Reasons...)
			ask = nil
		} else {
			got = append(got, bundleFile{path.Join(root, "nodes", px.Node, "status.json"), mustJSON(row.Status)})
		}
		for _, nf := range ask {
			body, err := bo.get(ctx, r, px, nf.path, nf.params)
			if errors.Is(err, context.DeadlineExceeded) {
				// A proxy that does not answer one request will not
				// answer the next: say so once and go on.
				errs = append(errs, fmt.Sprintf("%s: %v; the rest not asked", nf.name, err))
				break
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", nf.name, err))
				continue
			}
			got = append(got, bundleFile{path.Join(root, "nodes", px.Node, nf.name), body})
		}
		if len(errs) > 0 {
			got = append(got, bundleFile{path.Join(root, "nodes", px.Node, "errors.txt"), []byte(strings.Join(errs, "\n") + "\n")})
		}
		mu.Lock()
		files = append(files, got...)
		if len(errs) > 0 {
			failed++
		}
		mu.Unlock()
	})
	if err := writeBundle(bo.out, files, bo.now()); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: %d node(s), %d with errors (see their errors.txt)\n", bo.out, len(proxies), failed)
	return nil
}

// get asks for one file within --node-timeout (longer by default than
// status's: the reports read every Service's rules back, for up to two
// minutes on the proxy's side); a node that takes longer is reported, not
// waited for.
func (bo *bundleOptions) get(ctx context.Context, r *debug.Remote, px debug.Proxy, path string, params map[string]string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, bo.remote.nodeTimeout)
	defer cancel()
	body, err := r.Get(ctx, px, path, params)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("no answer within %s (a stopped or overloaded proxy): %w", bo.remote.nodeTimeout, context.DeadlineExceeded)
	}
	return body, err
}

// bundleVersions lists the client's version and each node's proxy version.
func bundleVersions(rows []nodeRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "client crossproxy %s %s/%s %s\n", version, runtime.GOOS, runtime.GOARCH, runtime.Version())
	for _, r := range rows {
		if r.Status == nil {
			fmt.Fprintf(&b, "node %s: unknown (%s)\n", r.Node, strings.Join(r.Reasons, "; "))
			continue
		}
		s := r.Status
		fmt.Fprintf(&b, "node %s: crossproxy %s %s/%s %s backend %s\n", r.Node, s.Version, s.OS, s.Arch, s.GoVersion, s.Backend)
	}
	return b.String()
}

func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return []byte(fmt.Sprintf("encode: %v\n", err))
	}
	return append(b, '\n')
}

// writeBundle writes the files as a gzipped tarball, by way of a temporary
// file renamed into place, so an interrupted bundle leaves no partial file.
func writeBundle(name string, files []bundleFile, at time.Time) error {
	tmp, err := os.CreateTemp(path.Dir(name), ".crossproxy-bundle-*")
	if err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	defer os.Remove(tmp.Name())
	zw := gzip.NewWriter(tmp)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: at, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write bundle %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("write bundle %s: %w", f.name, err)
		}
	}
	for _, c := range []io.Closer{tw, zw, tmp} {
		if err := c.Close(); err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	return nil
}
