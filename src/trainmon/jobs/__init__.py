"""Training jobs as SageMaker defines them: the job document (:mod:`.document`) and its statuses
(:mod:`.status`). Pure: the store keeps documents, the runtime and the operations layer change them."""
