package executor

// Run is here to be imported.
func Run() {}
