"""One reader per input format; ``graphdist.data.loaders.load_graph`` picks among them.

* ``npz``: the graphdist ``.npz`` format (``load_npz``), memory-mapping uncompressed members.
* ``typed_npz``: its typed form (``edge_index__<src>__<rel>__<dst>``, ``x__<type>``, ...), read and written.
* ``ogb``: OGB node-property dataset directories (``load_ogb``), without the ``ogb`` package.
* ``ogb_hetero``: OGB's heterogeneous layout (ogbn-mag) into a typed graph (``load_ogb_hetero``).
* ``ogb_names``: ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M`` by name: found, or downloaded
  (``graphdist.data.download``), made undirected, memory checked.
* ``pyg``: saved torch_geometric dataset directories (``load_pyg_dataset``).
* ``planetoid``: the named Planetoid datasets (cora, citeseer, pubmed): fetch, download, raw files.
* ``typed_cora``: ``typed-cora``, cora as papers and the words they contain.
* ``edgelist``: ``src dst`` edge-list files with optional feature and label files (``load_edge_list``).
* ``text``: the chunked numeric text parser they share (``read_table``).
* ``common``: the validation helpers every reader shares and the ``Graph`` builder.
"""
