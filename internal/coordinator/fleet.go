package coordinator

import "github.com/toolfleet/toolfleet/pkg/runner"

// Fleet returns what a front end other than the ReAct loop's model needs
// to run calls exactly as the loop runs them (coordinator mcp): the
// runner's fleet ([runner.Runner.Fleet]), whose dispatcher Close closes.
func (c *Coordinator) Fleet() runner.Fleet { return c.runner.Fleet() }
