"""Facts the tool reasons with: versions, compatibility rules, what the loader does."""
