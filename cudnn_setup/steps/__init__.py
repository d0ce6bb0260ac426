"""What the commands are made of: the context they are handed and the wrapper they run in,
fetching, choosing a source of releases by version, and the steps several commands take
(recovery first, Theano's config, the loader). Below commands/, above sources/ and placement/."""
