package harness

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one child (etcd or kube-apiserver) with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func startProcess(bin, logPath string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childAttr()
	if err := spawn(cmd.Start); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{name: bin, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to end (SIGTERM) and kills it after grace.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stop %s: still running after SIGKILL", p.name)
	}
}

// tail is the end of the process log, for error messages.
func (p *process) tail() string {
	data, _ := os.ReadFile(p.logPath)
	s := string(data)
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	status := "running"
	if p.exited() {
		status = fmt.Sprintf("exit: %v", p.err)
	}
	return fmt.Sprintf("%s (%s) log %s:\n%s", p.name, status, p.logPath, strings.TrimSpace(s))
}
