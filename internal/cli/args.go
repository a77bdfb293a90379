package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// hoistFlags moves the flags that follow a leaf command's positional
// arguments in front of them, so `sandboxapi keys revoke ID --data-dir X`
// works as operators type it: urfave/cli stops reading flags at the first
// positional argument. A flag's value moves with it (for flags that take
// one); everything after "--" stays where it is; args that do not name a
// leaf command are returned unchanged.
func hoistFlags(cmds []*cli.Command, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var leaf *cli.Command
	i := 1
	for i < len(args) {
		c := findCommand(cmds, args[i])
		if c == nil {
			break
		}
		leaf, cmds, i = c, c.Subcommands, i+1
	}
	if leaf == nil || len(leaf.Subcommands) > 0 {
		return args
	}
	var flags, positional, tail []string
	for j := i; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			tail = args[j:]
			j = len(args)
		case len(a) > 1 && strings.HasPrefix(a, "-"):
			needsValue := !strings.Contains(a, "=") && takesValue(leaf, strings.TrimLeft(a, "-"))
			switch {
			case needsValue && j+1 < len(args):
				flags = append(flags, a, args[j+1])
				j++
			case needsValue:
				// A value flag with nothing after it stays last, where it
				// cannot swallow a positional argument as its value.
				positional = append(positional, a)
			default:
				flags = append(flags, a)
			}
		default:
			positional = append(positional, a)
		}
	}
	out := append([]string{}, args[:i]...)
	out = append(out, flags...)
	out = append(out, positional...)
	return append(out, tail...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the command's flag called name reads the next
// argument as its value (unknown flags are taken not to).
func takesValue(c *cli.Command, name string) bool {
	for _, f := range c.Flags {
		for _, n := range f.Names() {
			if n == name {
				tv, ok := f.(interface{ TakesValue() bool })
				return ok && tv.TakesValue()
			}
		}
	}
	return false
}
