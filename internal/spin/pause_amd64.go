package spin

// Pause tells the processor that the caller polls memory another core
// will write (x86's PAUSE). The poll loop that ends when the line changes
// then leaves without the pipeline flush a memory-order misprediction
// costs, and issues fewer loads meanwhile, which leaves more of the core
// to whatever shares it.
func Pause()
