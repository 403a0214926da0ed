"""kv-exec-bench's views: string anchors beside the structural or executable metrics they stand in
for, by cell and by ratio, and each metric's degradation onset."""
