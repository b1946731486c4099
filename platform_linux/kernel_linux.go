package nft

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

var _ kernel = (*netlinkKernel)(nil)

// netlinkKernel is the kernel's nftables in a network namespace: batches
// encoded straight into netlink messages and sent on one long-lived socket,
// reads through that socket or google/nftables.
type netlinkKernel struct {
	ns      *netNS
	conn    *batchConn
	encoder *ruleEncoder
}

// batch starts netlink messages for about n commands.
func (k *netlinkKernel) batch(n int) kernelBatch { return k.encoder.writer(n) }

// commit ends the batch's messages and sends them in one write.
func (k *netlinkKernel) commit(kb kernelBatch, describe func(i int) string) error {
	w, ok := kb.(*batchWriter)
	if !ok {
		return fmt.Errorf("commit a %T through netlink: not a batch of this kernel", kb)
	}
	msgs, err := w.finish()
	if err != nil {
		return err
	}
	return k.conn.send(k.ns, msgs, describe)
}

func (k *netlinkKernel) generation() (uint32, error) { return k.conn.generation(k.ns) }

func (k *netlinkKernel) census(main string) (map[string]tableCount, error) {
	return k.conn.census(k.ns, main)
}

// inventory lists crossproxy's tables in the kernel with their chains and sets.
func (k *netlinkKernel) inventory(main string) (map[string]inventory, error) {
	var out map[string]inventory
	err := k.ns.withConn(func(c *nftables.Conn) error {
		var err error
		out, err = inventoryWith(c, main)
		return err
	})
	return out, err
}

func inventoryWith(c *nftables.Conn, main string) (map[string]inventory, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	out := map[string]inventory{}
	for _, t := range tables {
		if ownTable(main, t.Name) {
			out[t.Name] = inventory{}
		}
	}
	if len(out) == 0 {
		return out, nil
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list chains of inet tables: %w", err)
	}
	for _, ch := range chains {
		if inv, ok := out[ch.Table.Name]; ok {
			inv.Chains = append(inv.Chains, ch.Name)
			out[ch.Table.Name] = inv
		}
	}
	for name, inv := range out {
		sets, err := c.GetSets(tableObj(name))
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("list sets of table inet %s: %w", name, err)
		}
		for _, s := range sets {
			inv.Sets = append(inv.Sets, s.Name)
		}
		out[name] = inv
	}
	return out, nil
}
