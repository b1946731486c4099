//go:build windows

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/eventlog"
	"golang.org/x/sys/windows/svc/mgr"
)

// platformCommands are the subcommands only Windows has.
func platformCommands() []*cobra.Command { return []*cobra.Command{newServiceCommand()} }

func newServiceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service",
		Short: "Install, control and run crossproxy as a Windows service",
		Long: `service manages the crossproxy Windows service. 'service install' registers it (and its
event log source) to run 'crossproxy service run -- RUN-FLAGS' at boot; 'service run' is what
the service manager starts: it runs the same sync loop as 'crossproxy run', logs to a file and
to the Windows event log, and on stop leaves the load balancers in place.`,
	}
	cmd.AddCommand(newServiceInstallCommand(), newServiceUninstallCommand(), newServiceRunCommand(),
		newServiceControlCommand("start"), newServiceControlCommand("stop"), newServiceStatusCommand())
	return cmd
}

func addNameFlag(cmd *cobra.Command, name *string) {
	cmd.Flags().StringVar(name, "name", "crossproxy", "service name (also the event log source)")
}

// runArgs returns the arguments after "--", which are 'crossproxy run' flags.
func runArgs(cmd *cobra.Command, args []string) ([]string, error) {
	at := cmd.ArgsLenAtDash()
	if at < 0 {
		if len(args) > 0 {
			return nil, fmt.Errorf("unexpected arguments %q: put 'crossproxy run' flags after --", args)
		}
		return nil, nil
	}
	if at > 0 {
		return nil, fmt.Errorf("unexpected arguments %q before --", args[:at])
	}
	out := args[at:]
	// Parse them now, so a typo fails at install rather than at boot.
	if err := newRunCommand().ParseFlags(out); err != nil {
		return nil, fmt.Errorf("run flags after --: %w", err)
	}
	return out, nil
}

func newServiceInstallCommand() *cobra.Command {
	var name, display, description, binary, fakeNetwork string
	var manual bool
	cmd := &cobra.Command{
		Use:   "install [flags] [-- RUN-FLAGS...]",
		Short: "Register the Windows service and its event log source",
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := runArgs(cmd, args)
			if err != nil {
				return err
			}
			if binary == "" {
				if binary, err = os.Executable(); err != nil {
					return fmt.Errorf("flag --binary: not set and the executable path is unknown: %w", err)
				}
			}
			m, err := mgr.Connect()
			if err != nil {
				return fmt.Errorf("connect to the service manager: %w", err)
			}
			defer m.Disconnect() //nolint:errcheck // nothing to do about it
			start := uint32(mgr.StartAutomatic)
			if manual {
				start = mgr.StartManual
			}
			svcArgs := []string{"service", "run", "--name", name}
			svcArgs = append(svcArgs, fakeHNSArgs(fakeNetwork)...)
			svcArgs = append(append(svcArgs, "--"), run...)
			s, err := m.CreateService(name, binary, mgr.Config{DisplayName: display, Description: description, StartType: start}, svcArgs...)
			if err != nil {
				return fmt.Errorf("create service %s: %w", name, err)
			}
			defer s.Close() //nolint:errcheck // nothing to do about it
			if err := setRestartOnFailure(s, cmd.ErrOrStderr()); err != nil {
				_ = s.Delete()
				return fmt.Errorf("service %s: %w", name, err)
			}
			if err := eventlog.InstallAsEventCreate(name, eventlog.Error|eventlog.Warning|eventlog.Info); err != nil && !strings.Contains(err.Error(), "exists") {
				_ = s.Delete()
				return fmt.Errorf("install event log source %s: %w", name, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "installed service %s: %s %s\n", name, binary, strings.Join(svcArgs, " "))
			return err
		},
	}
	addNameFlag(cmd, &name)
	cmd.Flags().StringVar(&display, "display-name", "crossproxy Kubernetes Service proxy", "display name")
	cmd.Flags().StringVar(&description, "description", "Programs HNS load balancers for Kubernetes Services on this node.", "description")
	cmd.Flags().StringVar(&binary, "binary", "", "path of crossproxy.exe the service runs (default: this executable)")
	cmd.Flags().BoolVar(&manual, "manual", false, "start on demand instead of at boot")
	addFakeHNSFlag(cmd, &fakeNetwork, "the service programs an in-memory HNS (see service run)")
	return cmd
}

// restartDelays are the waits before the service manager restarts the
// service after its first, second and every later failure; the count of
// failures resets after restartResetPeriod without one.
var restartDelays = []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second}

// restartResetPeriod is a day, in seconds, as SERVICE_FAILURE_ACTIONS wants it.
const restartResetPeriod = 86400

// recoveryConfigurer is the part of *mgr.Service that configures what the
// service manager does when the service fails; an interface so a test can
// check that install sets both parts without a service manager.
type recoveryConfigurer interface {
	SetRecoveryActions(actions []mgr.RecoveryAction, resetPeriod uint32) error
	SetRecoveryActionsOnNonCrashFailures(flag bool) error
}

// setRestartOnFailure makes the service manager restart the service after
// every failure. The restart actions alone cover only a crash (the process
// ending without reporting SERVICE_STOPPED). When the sync loop ends by
// itself (bad flags, no network, HNS not ready at boot) the service reports
// SERVICE_STOPPED with a service-specific exit code, and the service manager
// runs the failure actions for that only with
// fFailureActionsOnNonCrashFailures set (SERVICE_FAILURE_ACTIONS_FLAG);
// without it such a node stays without a proxy until someone acts. A clean
// stop (exit 0) is never restarted. The MSI sets the same two through its
// MsiServiceConfigFailureActions and MsiServiceConfig tables.
//
// A service manager that does not know that setting (ERROR_INVALID_LEVEL:
// Wine's, whose service test installs this way) gets a warning on warn, and
// the service still restarts after a crash; any other failure is an error.
func setRestartOnFailure(s recoveryConfigurer, warn io.Writer) error {
	actions := make([]mgr.RecoveryAction, 0, len(restartDelays))
	for _, d := range restartDelays {
		actions = append(actions, mgr.RecoveryAction{Type: mgr.ServiceRestart, Delay: d})
	}
	if err := s.SetRecoveryActions(actions, restartResetPeriod); err != nil {
		return fmt.Errorf("set restart on failure: %w", err)
	}
	err := s.SetRecoveryActionsOnNonCrashFailures(true)
	switch {
	case errors.Is(err, windows.ERROR_INVALID_LEVEL):
		_, werr := fmt.Fprintf(warn, "warning: this service manager does not support restart on a stop with a non-zero exit code "+
			"(SERVICE_CONFIG_FAILURE_ACTIONS_FLAG: %v): the service restarts after a crash only\n", err)
		return werr
	case err != nil:
		return fmt.Errorf("set restart on a stop with a non-zero exit code (SERVICE_CONFIG_FAILURE_ACTIONS_FLAG): %w", err)
	}
	return nil
}

// newServiceOpCommand builds a subcommand that acts on the installed
// service: it opens the service named by --name and passes it to op with
// the --timeout value (when timeout is true).
func newServiceOpCommand(use, short string, timeout bool, op func(cmd *cobra.Command, name string, s *mgr.Service, timeout time.Duration) error) *cobra.Command {
	var name string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := mgr.Connect()
			if err != nil {
				return fmt.Errorf("connect to the service manager: %w", err)
			}
			defer m.Disconnect() //nolint:errcheck // nothing to do about it
			s, err := m.OpenService(name)
			if err != nil {
				return fmt.Errorf("open service %s: %w", name, err)
			}
			defer s.Close() //nolint:errcheck // nothing to do about it
			return op(cmd, name, s, wait)
		},
	}
	addNameFlag(cmd, &name)
	if timeout {
		cmd.Flags().DurationVar(&wait, "timeout", 30*time.Second, "how long to wait for the service")
	}
	return cmd
}

func newServiceUninstallCommand() *cobra.Command {
	return newServiceOpCommand("uninstall", "Stop and remove the Windows service and its event log source (load balancers stay; see cleanup)", true,
		func(cmd *cobra.Command, name string, s *mgr.Service, timeout time.Duration) error {
			if err := stopService(s, timeout); err != nil {
				return fmt.Errorf("service %s: %w", name, err)
			}
			if err := s.Delete(); err != nil {
				return fmt.Errorf("delete service %s: %w", name, err)
			}
			if err := eventlog.Remove(name); err != nil && !errors.Is(err, windows.ERROR_FILE_NOT_FOUND) {
				return fmt.Errorf("remove event log source %s: %w", name, err)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "removed service %s\n", name)
			return err
		})
}

func newServiceControlCommand(verb string) *cobra.Command {
	return newServiceOpCommand(verb, strings.ToUpper(verb[:1])+verb[1:]+" the Windows service and wait until it is done", true,
		func(cmd *cobra.Command, name string, s *mgr.Service, timeout time.Duration) error {
			var err error
			if verb == "stop" {
				err = stopService(s, timeout)
			} else {
				err = startService(s, timeout)
			}
			if err != nil {
				return fmt.Errorf("%s service %s: %w", verb, name, err)
			}
			return printStatus(cmd.OutOrStdout(), name, s)
		})
}

func newServiceStatusCommand() *cobra.Command {
	return newServiceOpCommand("status", "Print the Windows service's state, process id and exit code", false,
		func(cmd *cobra.Command, name string, s *mgr.Service, _ time.Duration) error {
			return printStatus(cmd.OutOrStdout(), name, s)
		})
}

var stateNames = map[svc.State]string{
	svc.Stopped: "Stopped", svc.StartPending: "StartPending", svc.StopPending: "StopPending", svc.Running: "Running",
	svc.ContinuePending: "ContinuePending", svc.PausePending: "PausePending", svc.Paused: "Paused",
}

func printStatus(w io.Writer, name string, s *mgr.Service) error {
	st, err := s.Query()
	if err != nil {
		return fmt.Errorf("query service %s: %w", name, err)
	}
	_, err = fmt.Fprintf(w, "service %s: state=%s pid=%d exit=%d service-exit=%d\n", name, stateNames[st.State], st.ProcessId, st.Win32ExitCode, st.ServiceSpecificExitCode)
	return err
}

func waitState(s *mgr.Service, want svc.State, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.Query()
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		if st.State == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %s after %s", stateNames[st.State], timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func startService(s *mgr.Service, timeout time.Duration) error {
	if err := s.Start(); err != nil {
		return err
	}
	return waitState(s, svc.Running, timeout)
}

func stopService(s *mgr.Service, timeout time.Duration) error {
	st, err := s.Query()
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if st.State == svc.Stopped {
		return nil
	}
	if _, err := s.Control(svc.Stop); err != nil {
		return fmt.Errorf("send stop: %w", err)
	}
	return waitState(s, svc.Stopped, timeout)
}

func newServiceRunCommand() *cobra.Command {
	var name, logFile, fakeNetwork string
	cmd := &cobra.Command{
		Use:   "run [flags] [-- RUN-FLAGS...]",
		Short: "Run as the Windows service (what the service manager starts)",
		Long: `run is the service's entry point: the service manager starts it. It runs 'crossproxy run
RUN-FLAGS' under the service control dispatcher, writes the log to --log-file and warnings,
errors and start/stop to the Windows event log, and on Stop or Shutdown ends the sync loop,
leaving the load balancers in place. It is selected by this explicit argument, not by
detecting a service session, which Wine cannot report.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := runArgs(cmd, args)
			if err != nil {
				return err
			}
			useFakeHNS(fakeNetwork)
			if logFile == "" {
				logFile = filepath.Join(dataDir(), name+".log")
			}
			return runService(name, logFile, run)
		},
	}
	addNameFlag(cmd, &name)
	cmd.Flags().StringVar(&logFile, "log-file", "", `log file (default %ProgramData%\crossproxy\NAME.log)`)
	addFakeHNSFlag(cmd, &fakeNetwork, "program an in-memory HNS with one L2Bridge network of this name")
	return cmd
}

// runService redirects the process' standard error (where 'crossproxy run'
// logs) through a pipe into the log file and, for warnings and errors, the
// event log, then hands control to the service dispatcher.
func runService(name, logFile string, run []string) error {
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		return fmt.Errorf("flag --log-file: %w", err)
	}
	f := rotatingLog(logFile, serviceLogMaxMB, serviceLogBackups)
	defer f.Close() //nolint:errcheck // written through the pipe below
	// A crash bypasses the pipe (the process dies with it): the runtime
	// writes it to a file of its own, which an open handle would otherwise
	// keep the log from being renamed at rotation (Windows).
	crashFile := strings.TrimSuffix(logFile, filepath.Ext(logFile)) + "-crash.log"
	if c, err := os.OpenFile(crashFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
		fmt.Fprintf(f, "crash output not redirected to %s: %v\n", crashFile, err)
	} else {
		defer c.Close() //nolint:errcheck // only the runtime writes to it
		if err := debug.SetCrashOutput(c, debug.CrashOptions{}); err != nil {
			fmt.Fprintf(f, "crash output not redirected: %v\n", err)
		}
	}
	tee := &logTee{file: f}
	elog, err := eventlog.Open(name)
	if err != nil {
		fmt.Fprintf(f, "event log source %s unavailable, logging to this file only: %v\n", name, err)
	} else {
		tee.events = elog
		defer elog.Close() //nolint:errcheck // nothing to do about it
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("log pipe: %w", err)
	}
	stderr := os.Stderr
	os.Stderr = w
	done := make(chan struct{})
	go func() { tee.copy(r); close(done) }()

	h := &serviceHandler{name: name, args: run, tee: tee}
	runErr := svc.Run(name, h)
	os.Stderr = stderr
	w.Close() //nolint:errcheck // the reader sees EOF either way
	<-done
	if runErr != nil {
		return fmt.Errorf("service dispatcher (start this command from the service manager): %w", runErr)
	}
	return h.err
}

// serviceHandler runs 'crossproxy run' while the service manager wants it.
type serviceHandler struct {
	name string
	args []string
	tee  *logTee
	err  error
}

// Execute implements svc.Handler.
func (h *serviceHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		root := newRootCommand()
		root.SetArgs(append([]string{"run"}, h.args...))
		done <- root.ExecuteContext(ctx)
	}()
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	h.tee.event(eventInfo, fmt.Sprintf("crossproxy %s started as service %s: run %s", version, h.name, strings.Join(h.args, " ")))
	for {
		select {
		case err := <-done:
			// The sync loop ended on its own: a configuration or start error.
			h.err = err
			if err == nil {
				err = errors.New("the sync loop ended without a stop request")
			}
			h.tee.event(eventError, fmt.Sprintf("crossproxy service %s failed: %v", h.name, err))
			return true, 1
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				// The wait hint asks the service manager to give the sync
				// loop time to finish a sync in flight before it gives up.
				status <- svc.Status{State: svc.StopPending, WaitHint: 20000}
				h.tee.event(eventInfo, fmt.Sprintf("crossproxy service %s stopping", h.name))
				cancel()
				err := <-done
				if err != nil && !errors.Is(err, context.Canceled) {
					h.tee.event(eventError, fmt.Sprintf("crossproxy service %s stopped with an error: %v", h.name, err))
					return true, 2
				}
				h.tee.event(eventInfo, fmt.Sprintf("crossproxy service %s stopped; load balancers left in place", h.name))
				return false, 0
			}
		}
	}
}
