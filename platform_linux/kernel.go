package nft

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// kernel is the nftables of the backend's network namespace as a sync sees
// it: what crossproxy's tables hold, a batch to plan into, the commit of
// that batch as one transaction, and the two cheap reads drift detection
// rests on. On a node it is netlink (netlinkKernel); in tests it can be the
// in-memory model (memKernel), so the sync, diff and repair logic is tested
// without root and without a kernel, while the kernel-only parts (packets,
// the kernel's own validation, change notifications) keep their root tests.
type kernel interface {
	// inventory lists crossproxy's tables (main and its numbered shards)
	// with the names of their chains and sets.
	inventory(main string) (map[string]inventory, error)
	// batch starts a batch of about n commands for commit.
	batch(n int) kernelBatch
	// commit applies a batch made by this kernel's batch as one
	// transaction: all of it or, with an error naming the refused command
	// through describe(i), none of it.
	commit(b kernelBatch, describe func(i int) string) error
	// generation is the ruleset generation, which every commit by anyone
	// advances.
	generation() (uint32, error)
	// census counts the objects of each of crossproxy's tables.
	census(main string) (map[string]tableCount, error)
}

// kernelBatch is a batch being planned: full planning streams into it
// command by command.
type kernelBatch interface {
	opSink
	Len() int
}

// batchError is a batch the kernel refused; Errors name the failed commands.
type batchError struct {
	Errors []error
}

func (e *batchError) Error() string {
	return fmt.Sprintf("nftables batch rejected: %v", errors.Join(e.Errors...))
}

func (e *batchError) Unwrap() []error { return e.Errors }

// describeOp names one command of a batch for an error message: its nft
// text, or for elements how many and of which set.
func describeOp(op Op) string {
	switch op := op.(type) {
	case addElementsOp:
		return fmt.Sprintf("add %d elements of set %s", len(op.Elements), op.Set.Name)
	case delElementsOp:
		return fmt.Sprintf("delete %d elements of set %s", len(op.Elements), op.Set.Name)
	}
	one := &batch{Ops: []Op{op}}
	s := one.Text()
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

// ownTable reports whether a table is crossproxy's: the main table or one of
// its numbered shards.
func ownTable(main, name string) bool {
	if name == main {
		return true
	}
	rest, ok := strings.CutPrefix(name, main+"-")
	if !ok || rest == "" {
		return false
	}
	_, err := strconv.Atoi(rest)
	return err == nil
}
